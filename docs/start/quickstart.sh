odf-chain log warehouse/sensors                     # the blocks, newest first
odf-chain lineage warehouse/sensors temperature_c   # where its values come from
chain-verify warehouse/sensors                      # exit 0: everything holds
odf-chain audit warehouse/sensors -o report.html    # the same verdict as one page for auditors

cp -r warehouse/sensors tampered                    # alter one byte of a slice in a copy
printf 'X' | dd of="$(ls tampered/data/* | head -1)" bs=1 seek=100 conv=notrunc status=none
chain-verify tampered                               # exit 1, naming the block
