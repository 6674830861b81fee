"""Exports of a dataset's schema and field lineage into the formats lineage tools read:
a DataHub metadata file (:mod:`odf_chain.export.datahub`) and OpenLineage run events
(:mod:`odf_chain.export.openlineage`)."""
