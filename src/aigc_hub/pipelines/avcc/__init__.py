"""The avcc pipeline (seed 000, "AIGC-Hub 智视码", chapter 9): content codes for AI-generated
works — apply, review, chain, code, with the issued code embedded in the work as C2PA.

The folder map is completed as the modules land.
"""
