"""What a person reads on the node: snapshots with rates, the `sample` table, plain JSON of
reports, and `top`'s frame."""
