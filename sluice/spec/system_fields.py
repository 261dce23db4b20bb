"""Druid's input source system fields (`systemFields`): where a file record came from, as columns of its row.

Apart from the input source specs, so that a Spark Python worker reading records learns the names without loading
the spec model.
"""

FILE_URI, FILE_BUCKET, FILE_PATH = "__file_uri", "__file_bucket", "__file_path"
