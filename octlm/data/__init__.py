"""The text and its tokens: where documents come from, the corpus and its split, the byte-level BPE tokenizer, the
cached token files, and the batches drawn from them.
May import: config and the ground modules (no model: data knows nothing of what is trained on it).
"""
