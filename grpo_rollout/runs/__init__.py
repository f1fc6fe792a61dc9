"""A run folder's files: their names (:mod:`.names`), and each format's writer next to its reader."""
