"""Experiments over grids of runs: the length experiment (train short, test long), in cells a cluster can spread.
May import: every layer below the commands.
"""
