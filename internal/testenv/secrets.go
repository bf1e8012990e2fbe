package testenv

// SecretsHandler is a python handler that answers what it reads of its secrets on both
// backends' tests: DB_URL from its environment, the files of /var/run/secrets/tls (their names,
// without Kubernetes' ..data links, and cert's content), and whether cert can be written.
const SecretsHandler = `import os
def handle(event):
    d = '/var/run/secrets/tls'
    try:
        open(d + '/cert', 'a').close()
        writable = True
    except OSError:
        writable = False
    return {'db': os.environ.get('DB_URL'), 'cert': open(d + '/cert').read(), 'files': sorted(f for f in os.listdir(d) if not f.startswith('..')), 'writable': writable}
`

// SecretsRead is what SecretsHandler answers.
type SecretsRead struct {
	DB, Cert string
	Files    []string
	Writable bool
}
