"""The media toolkit shared by pipelines: :mod:`.tools` finds the FFmpeg executables."""
