"""Pure types of the backbone: envelope, ids, clock, errors and retry maths. No I/O here."""
