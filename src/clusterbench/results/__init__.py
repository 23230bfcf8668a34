"""Results: the run.json schema as typed records (schema, hardware), the one reader and writer of
every clusterbench document (documents, codec), and run folders (folder)."""
