"""The user's Pulumi project on disk: finding it and its stack files, reading YAML a person wrote
strictly, writing files atomically, telling generated files from hand-edited ones, and `aksgpu new`."""
