"""Cachepawl inside serving engines' own cache hooks.

Each engine has its own module, imported on its own (none is imported here): importing one
without its engine installed raises ImportError naming what is missing.

* :mod:`cachepawl.integrations.transformers`: ``save_cache`` / ``load_cache`` between a Hugging
  Face ``transformers`` (5.17) model's cache and a store, so that ``model.generate(...,
  past_key_values=cache)`` continues from a restored prefix.
"""
