// tasklock dashboard: the login page's script. The browser keeps the
// page's hash route (#/job/x) to itself, so the form carries it in "next"
// for the login to land there.
"use strict";

const next = document.getElementById("login-next");
if (next && !next.value && location.hash.startsWith("#/")) next.value = location.hash;
