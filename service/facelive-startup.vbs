' FaceLive Camera: start vcamd with its tray icon at log-on, without a console window.
'
' `vcamd service install` copies this file, with the full path of vcamd filled in, to the Startup
' folder. By hand: press Win+R, type shell:startup, press Enter, copy this file there and change
' the path below to the vcamd.exe of your Python environment (`where vcamd` prints it).
' The virtual camera is OBS's (install OBS and start its virtual camera once) or Unity Capture.
Set shell = CreateObject("WScript.Shell")
shell.Run """vcamd.exe"" run", 0, False
