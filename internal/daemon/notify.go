package daemon

import (
	"fmt"
	"slices"
	"strings"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// The service manager's readiness protocol (sd_notify(3)), for a daemon run
// as a systemd unit with Type=notify (packaging/neuralisfs.service). Each
// call is a no-op when $NOTIFY_SOCKET is unset, so the same daemon runs in
// a terminal, under mount(8) and under systemd. Errors are logged by the
// callers at most: a service manager that went away must not stop the
// mounts.

// NotifyReady tells the service manager that every mount (the main one and
// each view) is serving, or, after NotifyReloading, that a reload is done.
// status is a line for `systemctl status` ("" sends none).
func NotifyReady(status string) error {
	msg := sd.SdNotifyReady
	if status != "" {
		msg += "\nSTATUS=" + oneLine(status)
	}
	_, err := sd.SdNotify(false, msg)
	return err
}

// NotifyReloading tells the service manager that the daemon is re-reading
// its config; NotifyReady must follow once the new config serves (or the
// old one was kept). The monotonic timestamp is what systemd 253 and later
// require with RELOADING=1 (sd_notify(3), "MONOTONIC_USEC=").
func NotifyReloading() error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return err
	}
	usec := uint64(ts.Sec)*1e6 + uint64(ts.Nsec)/1e3
	_, err := sd.SdNotify(false, fmt.Sprintf("%s\nMONOTONIC_USEC=%d", sd.SdNotifyReloading, usec))
	return err
}

// NotifyStopping tells the service manager that the daemon is unmounting
// and shutting down.
func NotifyStopping() error {
	_, err := sd.SdNotify(false, sd.SdNotifyStopping)
	return err
}

// oneLine keeps a STATUS= value on one line of the notify datagram.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// readyStatus is the STATUS= line sent with READY=1.
func readyStatus(mps []string) string {
	mps = slices.Sorted(slices.Values(mps))
	return "serving " + strings.Join(mps, ", ")
}
