"""Readers of Hugging Face config.json files, one small function per model_type (see ``models.hf``)."""
