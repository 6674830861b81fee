"""Pure schema logic: evolution rules (and, later, field paths and conversions)."""

from odf_chain.schema.evolution import EvolutionViolation, check_evolution

__all__ = ["EvolutionViolation", "check_evolution"]
