"""Experiments over grids of runs (the length experiment, the task battery, context extension), in cells a
cluster can spread, and the paper claims their results check.
May import: every layer below the commands.
"""
