"""Shared test helpers: tiny model builders, LLM fixtures, the explicit-attention toy reference."""
