"""Plans: the JSON schema, partitions and copy nodes built from placed nodes, storage, checks."""
