package jail

import "os"

// systemDirs are the host's program directories a jail shows besides
// /usr: each is bound read-only when it is a directory, or recreated as
// the same symlink when it is one (merged /usr).
var systemDirs = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the pieces of /etc programs need to start: the loader's
// cache, the alternatives symlinks, time zones, TLS roots and the
// interpreters' own configuration. Nothing in it names the host's users;
// a jail that needs passwd, group or hosts generates its own.
var etcFiles = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/localtime", "/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/mime.types",
	"/etc/python3", "/etc/python3.11", "/etc/python3.12", "/etc/python3.13", "/etc/python3.14",
}

// systemMounts is the part of bubblewrap's command line that shows the
// host's system read-only: /usr, the systemDirs this machine has, and
// the etcFiles it has (each optional).
func systemMounts() []string {
	a := []string{"--ro-bind", "/usr", "/usr"}
	for _, dir := range systemDirs {
		fi, err := os.Lstat(dir)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(dir); err == nil {
				a = append(a, "--symlink", target, dir)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", dir, dir)
		}
	}
	for _, f := range etcFiles {
		a = append(a, "--ro-bind-try", f, f)
	}
	return a
}
