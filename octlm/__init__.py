"""octlm: a small language-model lab about token embeddings and position schemes."""

__version__ = "0.1.0"
