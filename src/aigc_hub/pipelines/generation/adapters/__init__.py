"""AI video providers behind one contract (:mod:`.base`), one module per provider."""
