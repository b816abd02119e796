"""HuggingFace transformers export: standalone modeling, configuration and tokenizer code (shipped
into every export directory and loaded with ``trust_remote_code=True``) and the converter from
fairseq-normformer models (convert.py; the CLI is ``normformer-export-hf``)."""
