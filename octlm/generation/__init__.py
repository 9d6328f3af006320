"""Generation: sampling, streaming decoding with the KV cache, batches of samples.
May import: storage, data, model, positions, config and the ground modules.
"""
