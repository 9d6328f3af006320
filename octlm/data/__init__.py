"""The text and its tokens: where documents come from, the corpus and its split, the byte-level BPE tokenizer,
the cached token files, the batches drawn from them, and reaching the Hugging Face Hub (`hub`: the local cache
first, one quick try, one line when it cannot be reached).
May import: config and the ground modules (no model: data knows nothing of what is trained on it).
"""
