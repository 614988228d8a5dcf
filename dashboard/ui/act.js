// tasklock dashboard, "act": cancel a running run, retry a failed one, and
// trigger a job with a note (POST api/runs/cancel, api/runs/retry,
// api/jobs/{name}/trigger with {"note"}). app.js calls runActions from
// runRow, run.js from the run page, and askTriggerNote from act. Stable ids and classes for browser
// tests: td.run-actions button.action-cancel / button.action-retry (on
// tr.run-row), #note-dialog with #note-text (textarea), #note-ok and
// #note-cancel.
"use strict";

// retryable lists the statuses a run may be retried from: a new attempt
// of the same tick (a triggered run is triggered again).
const retryable = new Set(["failed", "timeout", "lost", "interrupted", "cancelled"]);

// postJSON posts body as JSON with the session's CSRF token.
function postJSON(path, body) {
  return api(path, {
    method: "POST",
    headers: { Accept: "application/json", "Content-Type": "application/json", "X-CSRF-Token": state.csrf },
    body: JSON.stringify(body),
  });
}

// runKey is the body naming a run for cancel and retry.
function runKey(r) {
  return { job: r.job, tick: r.tick, trigger: r.trigger || "", shard: r.shard || 0 };
}

function runLabel(r) {
  return r.job + "'s run of " + fmtTime(r.tick) + (r.shards > 1 ? " (shard " + r.shard + "/" + r.shards + ")" : "") +
    (r.trigger ? " (trigger)" : "");
}

async function runAction(text, path, r, done) {
  if (!(await confirmAction(text))) return;
  try {
    await postJSON(path, runKey(r));
    message(done);
    await render();
  } catch (e) {
    message(e.message, true);
  }
}

// runActions is the Cancel or Retry button of a run row, or null.
function runActions(r) {
  if (r.status === "running") {
    return el("button", { type: "button", class: "action-cancel danger", disabled: !canWrite(), title: whyDisabled(),
      onclick: () => runAction("Cancel " + runLabel(r) + " on " + r.node + "? A command is stopped as on timeout; no retry follows.",
        "api/runs/cancel", r, "Cancel requested: the run ends within a second.") }, "Cancel");
  }
  if (retryable.has(r.status)) {
    const what = r.trigger ? "Trigger " + r.job + " again" : "Run " + runLabel(r) + " again, as its next attempt" +
      (r.shards > 1 ? " (every shard of the tick runs again)" : "");
    return el("button", { type: "button", class: "action-retry", disabled: !canWrite(), title: whyDisabled(),
      onclick: () => runAction(what + "?", "api/runs/retry", r, "Retry requested: a node takes it within a second.") }, "Retry");
  }
  return null;
}

// noteDialog returns the note dialog, made once.
function noteDialog() {
  let d = document.getElementById("note-dialog");
  if (d) return d;
  d = el("dialog", { id: "note-dialog" },
    el("form", { method: "dialog" },
      el("p", { id: "note-question" }),
      el("label", {}, "Note (optional, kept in the audit): ",
        el("textarea", { id: "note-text", rows: 3, cols: 50, maxLength: 1000 })),
      el("menu", {},
        el("button", { id: "note-cancel", value: "cancel" }, "Cancel"),
        el("button", { id: "note-ok", value: "ok", class: "danger" }, "Trigger"))));
  document.body.append(d);
  return d;
}

// askTriggerNote asks whether to trigger, with an optional note: the body
// to post ({} or {"note"}), or null when the user cancelled.
function askTriggerNote(text) {
  const d = noteDialog();
  document.getElementById("note-question").textContent = text;
  const t = document.getElementById("note-text");
  t.value = "";
  return new Promise((resolve) => {
    d.addEventListener("close", () => {
      if (d.returnValue !== "ok") return resolve(null);
      const note = t.value.trim();
      resolve(note ? { note: note } : {});
    }, { once: true });
    d.returnValue = "";
    d.showModal();
    t.focus();
  });
}
