"""Language models behind the gate (docs/ai.md)."""
