"""Generated from schemas/odf_chain.fbs by tools/gen_flatbuffers.py; do not edit."""
