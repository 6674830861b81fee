"""The presentation layer: what people and programs read, built from the core's answers.

:mod:`~odf_chain.views.blocks` renders blocks, events, schemas and states (``log``, ``schema``,
JSON); :mod:`~odf_chain.views.lineage` builds the lineage answers as JSON-ready documents and
text; :mod:`~odf_chain.views.lineage_dot` draws them with Graphviz; :mod:`~odf_chain.views.diff`
says what changed between two blocks (``diff``). The audit report is
:mod:`~odf_chain.views.audit` (the model), :mod:`~odf_chain.views.audit_graph` (its lineage
graph), :mod:`~odf_chain.views.audit_svg` (that graph laid out as SVG) and
:mod:`~odf_chain.views.audit_html` (the page). Nothing here changes a
dataset or decides a rule: the core (``chain``, ``rules``, ``replay``, ``verify``) does not
import this package.
"""
