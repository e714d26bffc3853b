// Package doctor checks what makes neuralisfs mounts fail or run slowly on
// this host and with one config: the FUSE device and helper, the settings
// allow_other and passthrough need, inotify limits against the sources'
// folders, FUSE over io_uring, a virtual machine's halt polling, the state folder, the config, its policy
// and its sources. Each check is one line with OK, WARN or FAIL and, when
// not OK, the fix. `neuralisfs doctor` prints them.
//
// It reads the host through Env so tests can point it at a fake /proc,
// /sys and /etc; it changes nothing.
package doctor
