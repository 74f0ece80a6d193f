"""The project's bottom layer: helpers that import nothing from the project (config rules,
optional-package checks, argument parsing). They sit inside ``envs`` because the envs are the
lowest layer and may import nothing above them; the app (``scpo_lightning``, ``callbacks``)
imports them from here, downwards (the import-linter contracts in pyproject.toml)."""
