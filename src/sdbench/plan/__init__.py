"""Plan: the config, the grid of cells, checks against the installed vLLM and the host, time
limits, hub pins.
"""
