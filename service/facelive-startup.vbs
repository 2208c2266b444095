' FaceLive Camera: start vcamd with its tray icon at log-on, without a console window.
'
' `vcamd service install` copies this file, with the full path of your Python environment filled in,
' to the Startup folder. By hand: press Win+R, type shell:startup, press Enter, copy this file there
' and change the python.exe path below to the one of the environment vcamd is installed in
' (`.venv\Scripts\python.exe` under the folder you cloned into). Window style 0 hides the console;
' errors from before the daemon's own log starts (an invalid config, no consent) are appended to the
' file named after 2>> (its folder must exist; `vcamd service install` uses
' %LOCALAPPDATA%\facelive\facelive\vcamd-startup.log, next to the daemon's own vcamd.log).
' The virtual camera is OBS's (install OBS, start its Virtual Camera once) or Unity Capture's.
Set shell = CreateObject("WScript.Shell")
shell.Run "cmd /c """"C:\path\to\.venv\Scripts\python.exe"" -m vcamd run 2>>""%TEMP%\facelive-vcamd-startup.log""""", 0, False
