"""The package manager as the roles rely on it: each successful package-list update is
recorded (the common role's apt hook), so the roles' install tasks, which update the lists
only when the last update is older than an hour, do not update them again each time."""


def test_a_successful_list_update_is_recorded(host):
    hook = host.check_output("apt-config dump APT::Update::Post-Invoke-Success")
    assert "/var/lib/apt/periodic/update-success-stamp" in hook, hook
    # Debian ships nothing that writes the stamp: it exists only if the hook ran on an update.
    stamp = host.file("/var/lib/apt/periodic/update-success-stamp")
    assert stamp.exists and stamp.is_file
