"""The user's Pulumi project on disk: finding it and its stack files, reading YAML a person wrote
strictly, editing one value of it in place (yaml_edit.py), writing files atomically, telling
generated files from hand-edited ones, and `aksgpu new`."""
