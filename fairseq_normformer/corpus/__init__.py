"""Corpus building (offline, before training): the standard-library docstring corpus, its
SentencePiece model and fairseq-preprocess'd data directories. Runtime datasets live in data/."""
