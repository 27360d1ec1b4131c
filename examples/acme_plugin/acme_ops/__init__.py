"""acme-ops: an example oplib plugin. Import nothing heavy here."""
