"""The hardened media toolkit shared by pipelines (seed 004 §3.3.3-9, §3.6.5, §3.11).

- :mod:`.tools`     where ffmpeg and ffprobe come from (a setting, the system, the wheel)
- :mod:`.sandbox`   how every tool process runs: limits, deadline, process group, scratch dir
- :mod:`.sniff`     a file's kind from its magic number
- :mod:`.inputs`    a source staged under a fixed name, behind format/codec/protocol whitelists
- :mod:`.probe`     the gate: facts and limits, checked before anything decodes
- :mod:`.commands`  the FFmpeg argument lists of each variant (pure)
- :mod:`.ladder`    make_variant: proxy, HLS ladder, poster, thumbnail strip, waveform
- :mod:`.frames`    sample_frames: evenly spaced gray frames for the frame checks
"""
