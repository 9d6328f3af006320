"""`octlm inspect` and `octlm probe`: what a trained (or pretrained) model's tables hold, as numbers, figures
and Markdown/HTML reports.
May import: storage, data, model, positions, config and the ground modules.
"""
