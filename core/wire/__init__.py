"""The rules of the wire both sides apply: what a node id may be, how a report is checked and
repaired, how it is framed on the stream, and the JSON Lines trace (``trace``)."""
