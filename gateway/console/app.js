// The console's entry: the two views behind #playground and #dashboard, and the API key
// form, shown when a request is refused with 401 (the key stays in this tab's sessionStorage).

import { apiKey, setApiKey } from "./api.js";
import { Dashboard } from "./dashboard.js";
import { Playground } from "./playground.js";

const $ = (id) => document.getElementById(id);
const VIEWS = ["playground", "dashboard"];

function showKeyForm(message) {
  $("key-message").textContent = message
    ? `${message}. Enter this gateway's API key (kept in this tab only).`
    : "API key for this gateway (kept in this tab only)";
  $("key-input").value = apiKey();
  $("key-form").hidden = false;
  $("key-input").focus();
}

const playground = new Playground({ onAuthRequired: showKeyForm });
const dashboard = new Dashboard();

function showView() {
  const name = VIEWS.includes(location.hash.slice(1)) ? location.hash.slice(1) : "playground";
  for (const view of VIEWS) {
    $(view).hidden = view !== name;
    $(`tab-${view}`).classList.toggle("active", view === name);
  }
  if (name === "dashboard") dashboard.start();
}

$("key-button").addEventListener("click", () => showKeyForm(""));
$("key-close").addEventListener("click", () => ($("key-form").hidden = true));
$("key-forget").addEventListener("click", () => {
  setApiKey("");
  $("key-input").value = "";
});
$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setApiKey($("key-input").value.trim());
  $("key-form").hidden = true;
  playground.loadModels();
});
window.addEventListener("hashchange", showView);
showView();
playground.loadModels();
