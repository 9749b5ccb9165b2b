"""What a person reads on the node: ``snapshots`` (snapshots with rates, for `sample` and `top`),
``sample_table`` (the `sample` table), ``plain_json`` (reports as plain JSON values),
``top_frame`` (one frame of `top`, drawn with rich)."""
