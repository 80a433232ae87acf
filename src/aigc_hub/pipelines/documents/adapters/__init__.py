"""Outside systems of the documents pipeline, behind one protocol each."""
