/**
 * The "New precision investigation" dialog: target, benchmark and rule.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

/** What the dialog returns: paths relative to the folder the file browser shows. */
export interface IInvestigation {
  target: string;
  bench: string;
  rule: string;
}

/** The form of the dialog (a Lumino widget whose getValue() Dialog calls). */
class InvestigationForm extends Widget {
  constructor(folder: string, dumps: string[], rules: string[], initial: IInvestigation) {
    super({ node: document.createElement('form') });
    this.addClass('nbprec-InvestigationForm');
    const listId = `nbprec-dumps-${Private.nextId++}`;
    const where = document.createElement('p');
    where.className = 'nbprec-InvestigationForm-where';
    where.textContent = `Paths are relative to ${folder ? `the folder ${folder}` : 'the root folder'}.`;
    this._target = Private.field(this.node, 'Target dump', 'the run that loses precision (NPU, float16, ...)', listId);
    this._bench = Private.field(
      this.node,
      'Benchmark dump',
      'the reference run (float32); leave empty to inspect the target alone',
      listId
    );
    const ruleLabel = document.createElement('label');
    ruleLabel.textContent = 'Rule';
    this._rule = document.createElement('select');
    this._rule.name = 'rule';
    for (const rule of rules) {
      const option = document.createElement('option');
      option.value = option.textContent = rule;
      this._rule.appendChild(option);
    }
    ruleLabel.appendChild(this._rule);
    const list = document.createElement('datalist');
    list.id = listId;
    for (const name of dumps) {
      const option = document.createElement('option');
      option.value = name;
      list.appendChild(option);
    }
    this.node.insertBefore(where, this.node.firstChild);
    this.node.append(ruleLabel, list);
    this._target.value = initial.target;
    this._bench.value = initial.bench;
    this._rule.value = rules.includes(initial.rule) ? initial.rule : rules[0];
    // Enter in a field accepts the dialog instead of submitting the form.
    this.node.addEventListener('submit', event => event.preventDefault());
  }

  getValue(): IInvestigation {
    return { target: this._target.value.trim(), bench: this._bench.value.trim(), rule: this._rule.value };
  }

  private _target: HTMLInputElement;
  private _bench: HTMLInputElement;
  private _rule: HTMLSelectElement;
}

/** Ask for target, benchmark and rule; resolves to null when cancelled. */
export async function askInvestigation(
  folder: string,
  dumps: string[],
  rules: string[],
  initial: IInvestigation
): Promise<IInvestigation | null> {
  const result = await showDialog({
    title: 'New precision investigation',
    body: new InvestigationForm(folder, dumps, rules, initial),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Create notebook' })],
    focusNodeSelector: 'input'
  });
  return result.button.accept && result.value ? result.value : null;
}

namespace Private {
  export let nextId = 0;

  export function field(form: HTMLElement, title: string, hint: string, listId: string): HTMLInputElement {
    const label = document.createElement('label');
    label.textContent = title;
    const input = document.createElement('input');
    input.type = 'text';
    input.className = 'jp-mod-styled';
    input.setAttribute('list', listId);
    input.placeholder = hint;
    input.name = title.toLowerCase().replace(/ /g, '-');
    label.appendChild(input);
    form.appendChild(label);
    return input;
  }
}
