package store

// PrivilegeCheckSQL is the check's statement, for the plan test.
const PrivilegeCheckSQL = privilegeCheck
