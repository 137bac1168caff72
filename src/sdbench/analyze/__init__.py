"""Analyze: records -> paired speedups, intervals, the lossless check, verdicts, the summary
stage's tables.
"""
