"""Analyses of single trained runs, each behind one command: a run scored at chosen lengths by the length
experiment's scorer (`scores_by_length`, `octlm score`) and runs side by side (`compare`, `octlm compare`).
May import: experiments and every layer below it.
"""
