"""Type-checked in CI (mypy and pyright): the README examples as a user writes them."""
