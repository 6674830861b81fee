import pyarrow as pa
from odf_chain import Dataset
from odf_chain.lineage import LineageRecorder

ds = Dataset.create("warehouse/sensors")  # a Seed block with a fresh did:odf id
ds.write(pa.table({"station": ["a", "b"], "temperature_c": [14.2, 13.9]}))

# A second write, with its field lineage: both columns come from a CSV file.
rec = LineageRecorder("load-readings")
csv = rec.external_input("readings", "file:///landing/readings.csv")
r = rec.read("read", csv, ["station", "temp"])
rec.write("write", {"station": r["station"], "temperature_c": r["temp"]})
ds.write(pa.table({"station": ["c"], "temperature_c": [12.0]}), lineage=rec)

print(ds.to_table(columns=["station", "temperature_c"]).to_pydict())
report = ds.verify()  # every block, every rule, every data slice's hash
print(report.ok, report.problems)
