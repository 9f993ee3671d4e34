// A small markdown subset as DOM nodes: paragraphs, headings, lists, code fences, inline
// code and bold. Model text only ever becomes text nodes (append of a string, textContent),
// never HTML, so a reply containing <script> shows as the characters it is.

const FENCE = /^\s*```\s*([\w+#.-]*)\s*$/;
const LIST_ITEM = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/;
const HEADING = /^(#{1,6})\s+(.*)$/;
const INLINE = /`([^`\n]+)`|\*\*(?=\S)(.+?)\*\*/g;

function element(tag, className) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  return node;
}

/** `text` with inline code and bold, appended to `parent` as text nodes and elements. */
function appendInline(parent, text) {
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    parent.append(text.slice(last, match.index));
    if (match[1] !== undefined) {
      const code = element("code");
      code.textContent = match[1];
      parent.append(code);
    } else {
      const strong = element("strong");
      appendInline(strong, match[2]);
      parent.append(strong);
    }
    last = match.index + match[0].length;
  }
  parent.append(text.slice(last));
}

/** The lines of one paragraph, their line breaks kept (chat replies mean them). */
function paragraph(lines) {
  const p = element("p");
  lines.forEach((line, i) => {
    if (i > 0) p.append(element("br"));
    appendInline(p, line);
  });
  return p;
}

/**
 * Render `text` as a DocumentFragment. An unclosed fence (a reply still streaming) renders
 * as code up to the end, so the layout does not jump when the closing fence arrives.
 */
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  let para = [];
  let list = null;
  const flush = () => {
    if (para.length) fragment.append(paragraph(para));
    para = [];
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      flush();
      const body = [];
      for (i++; i < lines.length && !FENCE.test(lines[i]); i++) body.push(lines[i]);
      const pre = element("pre");
      const code = element("code");
      if (fence[1]) pre.dataset.lang = fence[1];
      code.textContent = body.join("\n");
      pre.append(code);
      fragment.append(pre);
      continue;
    }
    if (!line.trim()) {
      flush();
      continue;
    }
    const heading = line.match(HEADING);
    if (heading) {
      flush();
      const h = element(`h${Math.min(6, heading[1].length + 2)}`);
      appendInline(h, heading[2]);
      fragment.append(h);
      continue;
    }
    const item = line.match(LIST_ITEM);
    if (item) {
      if (para.length) fragment.append(paragraph(para));
      para = [];
      const tag = /\d/.test(item[1]) ? "ol" : "ul";
      if (!list || list.tagName.toLowerCase() !== tag) {
        list = element(tag);
        if (tag === "ol") list.start = parseInt(item[1], 10);
        fragment.append(list);
      }
      const li = element("li");
      appendInline(li, item[2]);
      list.append(li);
      continue;
    }
    if (list && /^\s+\S/.test(line)) {
      // An indented line continues the list item above it.
      const li = list.lastElementChild;
      li.append(element("br"));
      appendInline(li, line.trim());
      continue;
    }
    list = null;
    para.push(line);
  }
  flush();
  return fragment;
}
