"""Report: tables and figures per round, notebook helpers, the report pages and index, the time
split.
"""
