"""Models: checkpoints downloaded, converted, truncated, deepened and quantized.
"""
