"""Measure: one cell or group: vLLM servers, the load generator, offline engines, GPU slots and
energy, records.
"""
