// tasklock dashboard: the delivery log of a job's notifications (notify: in
// serve's configuration), on the job page, from GET api/notifications?job=.
// Loaded after app.js, whose el, api, fmtTime and statusBadge it uses.
// Stable ids and classes for browser tests: #job-notifications,
// #notifications-table tr.notify-row[data-event][data-result],
// td.notify-target, td.notify-result, td.notify-error; p.notify-none when
// there are none.
"use strict";

// notifySection lists the job's notification deliveries, newest first:
// one row per attempt to one target (webhook or command). null when the
// store keeps no delivery log (501) or the API fails.
async function notifySection(name) {
  let data;
  try {
    data = await api("api/notifications?" + new URLSearchParams({ job: name, limit: "20" }));
  } catch (e) {
    return null;
  }
  const rows = data.notifications.map((d) => el("tr", { class: "notify-row", "data-event": d.event, "data-result": d.result, "data-id": d.id },
    el("td", {}, fmtTime(d.at)),
    el("td", { class: "notify-event" }, d.event),
    el("td", {}, fmtTime(d.tick), d.shard ? " shard " + d.shard : "", " ", statusBadge(d.status)),
    el("td", { class: "notify-target" }, d.target),
    el("td", { class: "num" }, d.attempt),
    el("td", { class: "notify-result notify-" + d.result },
      d.result + (d.code ? " (" + d.code + ")" : ""),
      d.next_retry ? el("span", { class: "muted" }, " next " + fmtTime(d.next_retry)) : null),
    el("td", { class: "notify-error" }, d.error || "—"),
    el("td", {}, d.node)));
  return el("section", { id: "job-notifications" },
    el("h2", {}, "Notifications"),
    rows.length
      ? el("table", { id: "notifications-table" },
        el("thead", {}, el("tr", {}, ["When", "Event", "Run", "Target", "Attempt", "Result", "Error", "Sent by"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows))
      : el("p", { class: "muted notify-none" }, "No notifications sent for this job."));
}
