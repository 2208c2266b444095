"""Files vcamd reads and writes: the daemon's own, private to the user (`private_files`), the disk they
sit on (`diskspace`), the user's photos (`images`, one decoded at a time: `photo_lane`) and the videos
`vcamd swap` and `--sink file:` write (`videofile`, with the input's sound kept: `audio`)."""
