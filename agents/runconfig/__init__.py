"""A run's options, stated once: the list (options.py), the typed value a run runs with (`RunConfig`, config.py),
the one validator (validate.py), resolution over an agent and the server's defaults (resolve.py) and the abstract
models that store them (storage.py). Beside the models: it imports nothing of the layers above them."""
