"""Training: the loop, what a run starts from (new, or a checked resume), the optimizer, precision, scoring
and TensorBoard tracking.
May import: storage, data, model, positions, config and the ground modules.
"""
