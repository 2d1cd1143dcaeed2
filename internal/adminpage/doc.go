// Package adminpage serves the operator's page: a read-only HTML view of
// the admin API on the debug listener (ADMIN_API=true), at Prefix.
//
// The page is rendered by the server with html/template from the same calls
// the admin API answers (bucket show, usage list, top and summary, each made on
// the API's handler in process and read from its JSON), the configuration
// as loaded (/rlconfig) and the service's own metrics (fleet size, degraded
// items, settle-ups). Its stylesheet is embedded in the binary: the page
// fetches nothing from elsewhere and runs no script. It only reads: the
// reset of a bucket is shown as the command and the admin API call that do
// it. Every value a request or a store carries goes through html/template's
// escaping; bytes that are not valid UTF-8 are shown as U+FFFD.
package adminpage
